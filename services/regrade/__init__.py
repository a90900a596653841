"""`passk regrade`: grade a run's trials again (say, after a judge outage)."""
