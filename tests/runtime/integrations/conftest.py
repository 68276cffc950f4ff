"""slime's source for these tests (the `slime_source` fixture lives in the root conftest)."""
