"""Every table of the product, gathered on one MetaData for Alembic."""

from autoscaler import pools as _pools  # noqa: F401  (registers pools)
from collector.tables import metadata
from predictor import store as _forecast_store  # noqa: F401  (registers forecasts)
from web import tables as _web_tables  # noqa: F401  (registers api_tokens on metadata)

target_metadata = metadata
