import sys, shutil
from pathlib import Path
import mlx.core as mx
a_dir, b_dir, alpha, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
a = mx.load(f"{a_dir}/model.safetensors"); b = mx.load(f"{b_dir}/model.safetensors")
if out.exists(): shutil.rmtree(out)
shutil.copytree(a_dir, out)
mx.save_safetensors(str(out / "model.safetensors"), {k: alpha * a[k] + (1 - alpha) * b[k] for k in a}, metadata={"format": "mlx"})
print("wrote", out)
