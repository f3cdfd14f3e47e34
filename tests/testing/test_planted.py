import pytest

from privml.testing.negative_controls import CONTROLS, Control
from privml.testing.planted import PlantedBug, by_name
from privml.testing.prediction_controls import PREDICTION_CONTROLS


def test_by_name_keys_in_order_and_refuses_a_repeated_name():
    bugs = [PlantedBug("b", "second"), PlantedBug("a", "first")]
    assert list(by_name(bugs)) == ["b", "a"]
    assert by_name(bugs)["a"] is bugs[1]
    with pytest.raises(ValueError, match="'a'"):
        by_name([*bugs, PlantedBug("a", "again")])


def test_controls_are_planted_bugs_with_their_own_fields_after_name_and_bug():
    control = CONTROLS["no-clipping"]
    assert isinstance(control, Control) and isinstance(control, PlantedBug)
    assert control.bug.startswith("per-example gradients not clipped")
    assert control.claimed_epsilon == 1.0 and control.default_trials == 60
    assert PREDICTION_CONTROLS["unhalved-vote"].method == "subsample-aggregate"
