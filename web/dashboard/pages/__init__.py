"""One module per dashboard page; each a thin router over the stores."""
