"""The API's request and answer shapes (pydantic), one module per resource, apart from the tables and the routes:
the routes parse and answer with them, and ``web.changes`` audits a resource as the API shows it."""
