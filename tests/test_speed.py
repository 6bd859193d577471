import pytest

from poa_mc.run import speed


@pytest.fixture(autouse=True)
def speed_file(tmp_path, monkeypatch):
    monkeypatch.setenv("POA_MC_SPEED_FILE", str(tmp_path / "speed.json"))


def test_no_estimate_before_a_run_then_the_median_rate():
    assert speed.expected_seconds(1e6, "cpu") is None
    for rate in (1e6, 3e6, 2e6):
        speed.record("cpu", cost=rate * 2.0, seconds=2.0)
    assert speed.expected_seconds(4e6, "cpu") == pytest.approx(2.0)  # median 2e6 units/s
    assert speed.expected_seconds(4e6, "cuda") is None  # per backend


def test_keeps_the_last_few_and_ignores_clock_noise():
    for i in range(speed.KEEP + 3):
        speed.record("cpu", cost=float(i + 1), seconds=1.0)
    speed.record("cpu", cost=1e12, seconds=0.001)  # too short to time the engine
    rates = sorted(float(i + 1) for i in range(3, speed.KEEP + 3))
    assert speed.expected_seconds(1.0, "cpu") == pytest.approx(1.0 / rates[len(rates) // 2])


def test_a_corrupt_file_is_no_estimate_not_an_error(tmp_path):
    (tmp_path / "speed.json").write_text("{not json")
    assert speed.expected_seconds(1.0, "cpu") is None
    speed.record("cpu", cost=10.0, seconds=1.0)
    assert speed.expected_seconds(10.0, "cpu") == pytest.approx(1.0)
