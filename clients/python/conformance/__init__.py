"""flowbus/1 conformance suite (a package so that its conftest does not shadow clients/python/tests)."""
