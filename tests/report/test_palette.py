"""The figures' colours come from typed series, never from parsing a line's name (issue 30)."""

from __future__ import annotations

from harness.cells import Series
from report.document.figures import FRAMEWORK_COLOURS, line_palette, palette


def test_a_studys_variants_take_their_frameworks_hue_one_shade_each() -> None:
    lines = {"pytorch · sgd": Series("pytorch", "sgd"), "pytorch · adam": Series("pytorch", "adam"),
             "tensorflow · sgd": Series("tensorflow", "sgd")}
    colours = palette(list(lines), lines)
    assert len(set(colours.values())) == 3, colours
    assert colours["pytorch · sgd"] != FRAMEWORK_COLOURS["pytorch"] != colours["pytorch · adam"]
    # each line keeps its framework's hue (one framework, one hue family), in shades that tell the variants apart
    for name, series in lines.items():
        assert abs(_hue(colours[name]) - _hue(FRAMEWORK_COLOURS[series.framework])) < 0.02, (name, colours)


def _hue(colour: str) -> float:
    import colorsys

    r, g, b = (int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4))
    return colorsys.rgb_to_hls(r, g, b)[0]


def test_plain_frameworks_keep_their_colours_and_a_name_is_never_split() -> None:
    colours = palette(["pytorch", "jax", "mine · fast"])
    assert colours["pytorch"] == FRAMEWORK_COLOURS["pytorch"] and colours["jax"] == FRAMEWORK_COLOURS["jax"]
    # a plugin framework whose name has the separator in it is not read as pytorch's variant: no series says so
    assert colours["mine · fast"] not in FRAMEWORK_COLOURS.values()


def test_one_setting_for_every_series_is_the_frameworks_own_colour() -> None:
    lines = {"pytorch": Series("pytorch", precision="fp32"), "tensorflow": Series("tensorflow", precision="fp32")}
    assert palette(list(lines), lines) == {fw: FRAMEWORK_COLOURS[fw] for fw in lines}


def test_lines_keyed_by_series_take_the_colours_their_names_took() -> None:
    """Issue 39: the report's figures key their colours by the line (a Series), not by its label; the colours are the
    ones the labels got, and a plugin framework's variant takes a colour of its own."""
    lines = [Series("pytorch", "adam"), Series("pytorch", "sgd"), Series("jax"), Series("mine", "fast")]
    by_line = line_palette(lines)
    named = palette(["pytorch · adam", "pytorch · sgd", "jax", "mine · fast"],
                    {"pytorch · adam": lines[0], "pytorch · sgd": lines[1], "mine · fast": lines[3]})
    assert list(by_line.values()) == list(named.values())
    assert by_line[Series("jax")] == FRAMEWORK_COLOURS["jax"]
    assert by_line[Series("pytorch", "adam")] != by_line[Series("pytorch", "sgd")]
    assert by_line[Series("mine", "fast")] not in FRAMEWORK_COLOURS.values()


def test_two_names_of_one_series_keep_two_colours() -> None:
    """The critical-batch study's best-rate panel shares its series with the first rate's: a plugin framework's two
    panels still take two colours (a palette that merged them by series drew both in one)."""
    shared = Series("fake", "lr_0.001")
    colours = palette(["fake [lr_0.001]", "fake [best learning rate per size]"],
                      {"fake [lr_0.001]": shared, "fake [best learning rate per size]": shared})
    assert len(set(colours.values())) == 2, colours
