"""Predict what fits and how fast it runs from a hardware spec and a model spec (a roofline model
calibrated per engine backend on published measurements)."""
