"""The TTFT forecast model: fit, warm vs cold, ETA, and how it is recorded."""
import numpy as np

from app.forecast import PRIOR, PrefillModel, features, nonnegative_fit


def synthetic(model, theta, sizes):
    for new, cached in sizes:
        model.observe(new, cached, float(features(new, cached) @ np.array(theta)))


def test_prior_only_forecast_is_sane():
    model = PrefillModel()
    f = model.forecast(2048, 0)
    assert f.num_samples == 0 and f.cached_tokens == 0
    assert f.cold_seconds == f.warm_seconds == f.expected_seconds
    assert abs(f.cold_seconds - float(features(2048, 0) @ np.array(PRIOR))) < 1e-9


def test_fit_recovers_the_machine_speed():
    truth = (0.1, 1.0, 0.5)            # a machine ~3x faster than the prior
    model = PrefillModel()
    synthetic(model, truth, [(128, 0), (512, 0), (1024, 0), (4096, 0), (100, 4000), (2000, 0)] * 3)
    for new, cached in [(3000, 0), (50, 6000)]:
        expected = float(features(new, cached) @ np.array(truth))
        assert abs(model.predict(new, cached) - expected) / expected < 0.1


def test_warm_is_faster_than_cold_and_capped_at_prompt_minus_one():
    model = PrefillModel()
    f = model.forecast(4000, 3990)
    assert f.is_warm and f.warm_seconds < f.cold_seconds / 10
    assert model.forecast(100, 500).cached_tokens == 99        # the last token is always computed


def test_nonnegative_fit_never_returns_negative_coefficients():
    x = np.array([[1, 1, 0], [1, 2, 0], [1, 3, 0]], dtype=float)
    y = np.array([3.0, 2.0, 1.0])                # falling time with size: LS would go negative
    theta = nonnegative_fit(x, y, np.ones(3))
    assert np.all(theta >= 0)


def test_observe_ignores_unusable_measurements():
    model = PrefillModel()
    for args in [(0, 0, 1.0), (100, 0, None), (100, 0, 0.0)]:
        model.observe(*args)
    assert model.num_samples == 0


def test_eta_counts_down_and_tracks_a_slow_machine():
    model = PrefillModel()
    total = 4000
    start = model.eta(total, 0, 0, 0.0)
    mid = model.eta(total, 0, 2000, model.predict(2000, 0))
    assert start > mid > 0 and model.eta(total, 0, total, 5.0) == 0.0
    slow = model.eta(total, 0, 2000, 2 * model.predict(2000, 0))
    assert abs(slow / mid - 2.0) < 1e-6
