"""The review queue: a web app where people read trials and label what the judges decided
(`passk review`, docs/review.md)."""
