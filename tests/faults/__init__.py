"""The fault suite: tests grouped by fault class (registry.py); ``python -m tests.faults`` runs them."""
