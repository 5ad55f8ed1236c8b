"""Specifications shared by ops and the object model: tensor, quantization and parameter specs."""
