"""The dashboard's static files: its own CSS and JS from ``web/dashboard/static/``, and plotly.js from the installed
``plotly`` package (a declared dependency; nothing is fetched from a CDN and no copy lives in the repository)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from web.dashboard.deps import PageNotFound
from web.dashboard.security import DashboardRoute

router = APIRouter(route_class=DashboardRoute)
STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
MEDIA_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
CACHE = "public, max-age=3600"


def plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it (``plotly/package_data/plotly.min.js``), found without importing
    the package (its Python side is not needed, only the bundle)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise PageNotFound("plotly.js: the plotly package is not installed (pip install 'fleetpilot[server]')")
    return Path(spec.origin).resolve().parent / "package_data" / "plotly.min.js"


@router.get("/static/vendor/plotly.min.js")
def plotly_bundle() -> FileResponse:
    return FileResponse(plotly_js(), media_type="text/javascript", headers={"Cache-Control": CACHE})


@router.get("/static/{name}")
def static(name: str) -> FileResponse:
    """Only the files of the static folder itself, by plain name (no paths, no dotfiles)."""
    path = STATIC_DIR / name
    if "/" in name or name.startswith(".") or path.suffix not in MEDIA_TYPES or not path.is_file():
        raise PageNotFound(f"no static file {name!r}")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers={"Cache-Control": CACHE})
