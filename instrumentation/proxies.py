"""Which reverse proxies the HTTP servers (the collector, serving's gateway) believe about the client's address."""

from __future__ import annotations


def proxy_settings(trusted: list[str]) -> dict:
    """uvicorn's proxy-header settings: X-Forwarded-For / -Proto read only from `trusted` addresses (or CIDR ranges),
    and not at all when there are none. uvicorn's own default trusts them from 127.0.0.1, so any client on the host
    could name another address and dodge, or turn against another, the per-address limits."""
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": list(trusted) or None}
