"""Integrations with the training frameworks this package serves (slime)."""
