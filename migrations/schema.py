"""Every table of the product, gathered on one MetaData for Alembic."""

from collector.tables import metadata
from web import tables as _web_tables  # noqa: F401  (registers api_tokens on metadata)

target_metadata = metadata
