"""The audited changes, one module per subject: each change is one function that the API route and the dashboard's
form both call, made inside ``web.changes.audit.Auditor.change`` (one transaction with its audit row, the store's
refusals answered as the API answers them, the tenants part published after)."""
