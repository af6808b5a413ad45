"""Each built-in detector: valid samples caught whole, near misses (bad checksum, too short, a
reserved range, almost a key) left alone; the corpus's precision and recall; custom detectors
checked at config load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from switchyard.core.config import parse_config
from switchyard.core.guardrails import BUILT_IN_DETECTORS, GuardrailConfig
from switchyard.core.settings import ConfigError
from switchyard.guards.detectors import BUILT_IN, iban, luhn
from switchyard.guards.scan import scan
from tests.guards.corpus import FRAMES, NEGATIVE, POSITIVE, scores


def found(name: str, text: str) -> list[str]:
    hits, _ = scan([(BUILT_IN[name], name)], text)
    return [text[h.start:h.end] for h in hits]


def test_the_table_is_the_configs_list() -> None:
    assert tuple(BUILT_IN) == BUILT_IN_DETECTORS == tuple(POSITIVE) == tuple(NEGATIVE)


@pytest.mark.parametrize("name", BUILT_IN_DETECTORS)
def test_valid_samples_are_caught(name: str) -> None:
    for sample in POSITIVE[name]:
        for frame in FRAMES:
            assert found(name, frame.format(sample)) == [sample], (name, frame.format(sample))


@pytest.mark.parametrize("name", BUILT_IN_DETECTORS)
def test_near_misses_are_left_alone(name: str) -> None:
    for sample in NEGATIVE[name]:
        for frame in FRAMES:
            assert found(name, frame.format(sample)) == [], (name, frame.format(sample))


def test_checksums() -> None:
    assert luhn("4111111111111111") and not luhn("4111111111111112")
    assert iban("GB82WEST12345698765432") and not iban("GB82WEST12345698765433")
    assert not iban("GB82WEST1234569876543")  # one short of Britain's 22


def test_precision_and_recall_over_the_corpus() -> None:
    for name, (tp, fp, fn) in scores().items():
        print(f"{name}: precision {tp / (tp + fp):.3f} recall {tp / (tp + fn):.3f}")
        assert (fp, fn) == (0, 0), name


def test_every_pattern_is_bounded() -> None:
    for det in BUILT_IN.values():
        assert 0 < det.span <= 8192, det.name


def guard(**g: object) -> dict[str, object]:
    return {"models": [{"name": "openai/m", "deployments": [{"name": "d", "base_url": "http://x/v1"}],
                        "guardrails": [g]}]}


def test_a_custom_detector_is_checked_at_load() -> None:
    ok = parse_config(guard(detectors=[{"name": "ticket", "pattern": r"TCK-\d{6}"}]))
    g = ok.models[0].guardrails[0]
    assert g.label == "ticket" and g.action == "redact" and g.direction == "both"
    for pattern, why in [(r"TCK-\d+", "without bound"), (r"TCK-(\d{2}", "not a regular expression"),
                         (r"a{0,3}", "matches the empty string"), (r"x.{0,9000}", "more than hold")]:
        with pytest.raises(ConfigError, match=why):
            parse_config(guard(detectors=[{"name": "t", "pattern": pattern}]))


def test_config_mistakes_are_named() -> None:
    for g, why in [({"detectors": ["emails"]}, "unknown detector 'emails'"),
                   ({"detectors": ["email", "email"]}, "listed twice"),
                   ({"detectors": ["email"], "action": "block", "restore": True}, "action redact only"),
                   ({"detectors": ["email"], "restore": True, "direction": "response"}, "direction request"),
                   ({"detectors": ["presidio"], "direction": "both"}, "direction must be request"),
                   ({"detectors": []}, "give detectors")]:
        with pytest.raises(ConfigError, match=why):
            parse_config(guard(**g))


def test_a_hold_smaller_than_a_built_in_span_is_refused() -> None:
    from switchyard.guards.rules import Guardrails
    with pytest.raises(ConfigError, match="detector 'email' can span 601 characters, more than hold"):
        Guardrails(parse_config(guard(detectors=["email"], hold=100)))
    assert Guardrails(parse_config(guard(detectors=["phone"], hold=100))).any


def test_names_default_to_the_detectors() -> None:
    assert GuardrailConfig(detectors=["email", "phone"]).label == "email+phone"
    assert GuardrailConfig(name="pii", detectors=["email"]).label == "pii"


def test_presidio_without_its_extra_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without presidio-analyzer (made unimportable here) a guard that lists it fails at start,
    naming the extra to install, not on the first request."""
    import sys

    from switchyard.guards import presidio
    from switchyard.guards.rules import Guardrails
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    presidio.analyzer.cache_clear()
    with pytest.raises(ConfigError, match=r"presidio extra: pip install 'switchyard-gateway\[presidio\]'"):
        Guardrails(parse_config(guard(detectors=["presidio"], direction="request")))


def test_check_config_names_a_built_in_that_does_not_fit_the_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from switchyard.http.cli import main
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(guard(detectors=["secret"], hold=1000)))
    assert main(["check-config", str(path)]) == 2
    assert "models.0.guardrails.0: detector 'secret' can span 8154 characters" in capsys.readouterr().err
