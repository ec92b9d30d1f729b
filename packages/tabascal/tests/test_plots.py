import numpy as np

from tabascal.fitting import plots


def _png_size(path):
    # Width and height from the PNG header (IHDR chunk), read without an image library.
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_loss_plot_is_a_png_of_the_requested_size(tmp_path):
    loss = np.geomspace(10.0, 1.0, 50)
    path = plots.plot_loss(loss, loss / 2, tmp_path / "loss.png")
    assert _png_size(path) == (800, 320)


def test_baseline_plot_has_one_panel_per_baseline(tmp_path):
    rng = np.random.default_rng(0)
    t = np.arange(30.0)
    data = rng.normal(size=(3, 30)) + 1j * rng.normal(size=(3, 30))
    path = plots.plot_baselines(
        t, data, data * 0.9, data * 0.1, ["a", "b", "c"], tmp_path / "vis.png"
    )
    # 2.2 inches per panel at 100 dpi.
    assert _png_size(path) == (800, 660)
