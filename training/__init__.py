"""Scripts that build artifacts shipped in the triode package; not part of the wheel."""
