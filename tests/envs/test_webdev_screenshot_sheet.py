"""scripts/webdev/compare_screenshots.py: the docs' before / after sheet of held-out pages, on
hand-made eval folders (a greedy one and a sampled-only one) with real PNG screenshots."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("compare_screenshots", ROOT / "scripts" / "webdev" / "compare_screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def eval_folder(root: Path, name: str, colour: str, sampled: bool, rewards: list[float]) -> Path:
    from PIL import Image

    folder = root / name
    where = folder / "sampled" if sampled else folder
    where.mkdir(parents=True)
    rows = []
    for k, reward in enumerate(rewards):
        shot = root / f"{name}-{k}.png"
        Image.new("RGB", (1440, 900), colour).save(shot)
        rows += [{"task_id": f"gen-task{k}", "reward": reward, "info": {"screenshot": str(shot)}}] * (2 if sampled else 1)
    (where / "trajectories.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_the_sheet_has_a_row_per_task_and_each_stages_screenshot(tmp_path):
    from PIL import Image

    module = load()
    before = eval_folder(tmp_path, "episodes_sft", "#ff0000", sampled=False, rewards=[1.0, 0.5, 0.0])
    after = eval_folder(tmp_path, "episodes_rl", "#0000ff", sampled=True, rewards=[1.0, 0.9, 0.8])
    out = tmp_path / "sheet.png"
    module.main([str(before), str(after), "-n", "2", "--names", "SFT,RL", "--out", str(out)])
    sheet = Image.open(out).convert("RGB")
    width, height = module.WIDTH + 8, module.HEIGHT + module.LABEL + 8
    assert sheet.size == (3 * width, 2 * height)  # reference, SFT, RL columns; 2 of the 3 tasks
    middle = module.LABEL + module.HEIGHT // 2
    assert sheet.getpixel((width // 2, middle)) == (153, 153, 153)  # no stored reference for a made-up task: grey
    assert sheet.getpixel((width + width // 2, middle)) == (255, 0, 0)  # SFT's screenshot
    assert sheet.getpixel((2 * width + width // 2, height + middle)) == (0, 0, 255)  # RL's, second row
