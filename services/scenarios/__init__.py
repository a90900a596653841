"""Scenario definitions: YAML loading and validation, publishing, the shared catalog."""
