"""The versioned HTTP API (`/v1`) for agents not written in Python, served by `countersign web`
beside `POST /slack/events` (`app.create_api`). Nothing imports it but the web entry point
(`bot/server.py`)."""

from .app import create_api

__all__ = ["create_api"]
