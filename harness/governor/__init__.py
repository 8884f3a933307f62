"""The context-size governor: estimation, calibration, policy, the proxy and its alerts."""
