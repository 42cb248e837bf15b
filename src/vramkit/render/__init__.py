"""Turning snapshots into what people and programs read: text tables, JSON, CSV. No computing."""
