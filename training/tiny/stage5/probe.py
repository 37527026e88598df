"""Quick probe of a candidate model: base cells (a, b single-turn) + agent cells."""
import sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "src"))
from triode.model.blas import preload_blas, set_threads; preload_blas("auto"); set_threads(1)
from mlx_lm import load
from training.tiny.evaluate import heldout, measure, CELLS, AGENT_FAMILIES, AGENT_FILLER
model_dir = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
model, tok = load(model_dir, trust_remote_code=True)
t = time.time()
out = {}
for unseen in (False, True):
    s = "b" if unseen else "a"
    for family in ("reply", "tool", "tool_result", "json", "think"):
        seed = 1000 + 100 * [c[0] for c in CELLS].index(family) + 10 + int(unseen)
        exs = heldout(n, unseen=unseen, family=family, turns=1, seed=seed, exclude=set())
        out[f"{s}/{family}"] = measure(model, tok, family, exs)["accuracy"]
    for family in ("reply", "tool", "tool_result"):
        seed = 5000 + 100 * AGENT_FAMILIES.index(family) + int(unseen)
        exs = heldout(max(1, n // 6), unseen=unseen, family=family, turns=0, seed=seed, exclude=set(), agent=True)
        out[f"{s}/{family}/agent"] = measure(model, tok, family, exs)["accuracy"]
    print(model_dir, s, {k: round(v, 3) for k, v in out.items() if k.startswith(s)}, flush=True)
print("seconds", round(time.time() - t))
