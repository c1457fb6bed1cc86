"""Example agents that use countersign (import path `examples.*` from the repository root)."""
