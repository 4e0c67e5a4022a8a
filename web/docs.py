"""``/docs``: Swagger UI served from this server, so the API docs work on a machine without internet access.

FastAPI's own ``/docs`` page loads Swagger UI from a CDN. Here its files come from the ``swagger-ui-py`` package (a
declared server dependency shipping Swagger UI 5, which reads the OpenAPI 3.1 that FastAPI writes), served under
``/docs/assets/``; nothing of it is copied into this repository. ``/openapi.json`` is served here too, so both answer
only who may read them when ``scrape_token`` is set (``web.scrape_access``); Swagger UI's own files stay public.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from web.scrape_access import DocsAccess

DOCS_PATH = "/docs"
OPENAPI_PATH = "/openapi.json"
ASSETS_PATH = "/docs/assets"
ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")


def swagger_ui_dir() -> Path:
    """The folder of Swagger UI's files inside the installed ``swagger_ui`` package (found without importing it)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install 'fleetpilot[server]'")
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    missing = [name for name in ASSET_FILES if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"swagger-ui-py at {folder} lacks {', '.join(missing)}")
    return folder


def install_docs(app: FastAPI) -> None:
    """Mount the assets, answer ``/openapi.json`` and ``/docs`` with a page naming only them (create the app with
    ``docs_url=None, openapi_url=None``: FastAPI's own routes would answer everyone)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui-assets")

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi(_access: DocsAccess) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs(_access: DocsAccess) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_PATH,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        )
