from tests.unit.judge.conftest import standin  # noqa: F401  (a real stand-in server)
