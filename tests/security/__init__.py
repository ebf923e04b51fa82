"""Cross-cutting security tests: every surface at once (docs/security.md)."""
