"""The GPU math modes, what every framework shares: whether a card has TF32, and how a request is checked.

``math_mode = "ieee"`` makes float32 convolutions and matmuls true float32, ``"tf32"`` lets them use TensorFloat-32
tensor cores (Ampere and newer), ``"framework-default"`` changes nothing; in every case the adapter reports what the
framework will do, read from the framework's own switches (never the request echoed back), and the worker fails a
trial whose report is not what was asked (harness.config.precision.check_math_mode).
Each framework applies and reads its own switches in ``adapters/<framework>/mathmode.py`` (``apply``, ``read``),
each function taking the framework's module, so that no framework is imported there and each can be tested with a
stand-in. See docs/precision.md, "Math mode", for the switches and the frameworks' defaults.
"""

from __future__ import annotations

from typing import Any

from harness.config.precision import TF32_MIN_CAPABILITY


def _capability(value: Any) -> tuple[int, ...] | None:
    """A compute capability as a tuple, from ``(8, 0)``, ``"8.0"`` or ``"80"``; None where unreadable."""
    try:
        if isinstance(value, (tuple, list)):
            return tuple(int(v) for v in value)
        text = str(value)
        if "." in text:
            return tuple(int(v) for v in text.split("."))
        return (int(text[:-1]), int(text[-1])) if text.isdigit() and len(text) >= 2 else None
    except (TypeError, ValueError):
        return None


def has_tf32(capability: Any) -> bool | None:
    """Whether a GPU of this compute capability has TF32 tensor cores (>= 8.0); None where it is unknown."""
    cap = _capability(capability) if capability is not None else None
    return None if cap is None else cap >= TF32_MIN_CAPABILITY

