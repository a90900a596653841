"""Pure grading maths over the contract models: pass@k / pass^k estimators, calibration
maths, and the registry of judge kinds. No I/O; tested in milliseconds."""
