"""A real ScaleLab kernel started with a broken store setting: it starts and says what to fix."""

from __future__ import annotations

from pathlib import Path

from jupyter_client.manager import start_new_kernel


def test_bad_store_url_leaves_the_kernel_alive_with_a_readable_message(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = {**kernel_environment, "SCALELAB_STORE_URL": "nosuchproto://namenode/course"}
    km, kc = start_new_kernel(kernel_name="scalelab-pytorch", env=env, cwd=str(tmp_path))
    try:
        outputs: list[str] = []
        reply = kc.execute_interactive(
            "print(1 + 1); print(type(store).__name__)",
            output_hook=lambda msg: outputs.append(
                msg["content"].get("text", "") if msg["content"].get("name") == "stdout" else ""
            ),
            timeout=120,
        )
        assert reply["content"]["status"] == "ok"
        lines = "".join(outputs).splitlines()
        assert lines[-2:] == ["2", "UnavailableStore"]
        # The banner (normal output with the first cell) says what is wrong with the store.
        banner = "\n".join(lines[:-2])
        assert banner.startswith("ScaleLab pytorch kernel: ") and "nosuchproto" in banner
        assert km.is_alive()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
