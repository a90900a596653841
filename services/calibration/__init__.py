"""Judge calibration: labelled sets, `passk calibrate` / `passk label`, and the calibration
processor that folds production labels into each judge's running matrix."""
