"""``amends demo --serve``: serve the demo's saga log on the web page, without tokens."""

from __future__ import annotations

from typing import Any

__all__ = ["serve_demo"]


def serve_demo(result: Any, *, db: str, host: str = "127.0.0.1", port: int = 8765) -> int:
    """Serve ``db`` (the demo's saga log) in ``--no-auth`` mode until interrupted.

    Args:
        result: The :class:`amends.sandbox.demo.DemoResult` (its saga is shown first).
        db: The demo's saga log; its world file is ``db + ".world"``.
        host: Address to listen on.
        port: Port to listen on.
    """
    import uvicorn

    from ..engine import Engine
    from ..sandbox import demo_catalog
    from .app import ServerSettings, create_app

    catalog = demo_catalog(db)
    app = create_app(lambda: Engine(catalog, log=db), ServerSettings(no_auth=True))
    saga_id = getattr(result, "saga_id", "")
    print(f"amends: serving the demo on http://{host}:{port}/ui/sagas/{saga_id}  (Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
