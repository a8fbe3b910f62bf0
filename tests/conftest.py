import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MTL_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data():
    """Real dataset files in ../shared/data; tests using them skip on a fresh clone."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (set MTL_SHARED_DATA)")
    return SHARED_DATA
