"""The training pipeline of the bundled tiny model (src/triode/model/tiny)."""
