"""The dashboard's static files from ``web/dashboard/static/``: its own CSS and JS, and under ``vendor/`` uPlot
(its charts; vendored unmodified with its licence, ``vendor/LICENSE-uPlot.txt``). Nothing is fetched from a CDN."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from web.dashboard.deps import PageNotFound
from web.dashboard.security import DashboardRoute

router = APIRouter(route_class=DashboardRoute)
STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
MEDIA_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml", ".txt": "text/plain"}
CACHE = "public, max-age=3600"


def _file(folder: Path, name: str) -> FileResponse:
    """Only the files of ``folder`` itself, by plain name (no paths, no dotfiles)."""
    path = folder / name
    if "/" in name or name.startswith(".") or path.suffix not in MEDIA_TYPES or not path.is_file():
        raise PageNotFound(f"no static file {name!r}")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers={"Cache-Control": CACHE})


@router.get("/static/vendor/{name}")
def vendored(name: str) -> FileResponse:
    return _file(STATIC_DIR / "vendor", name)


@router.get("/static/{name}")
def static(name: str) -> FileResponse:
    return _file(STATIC_DIR, name)
