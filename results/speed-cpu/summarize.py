"""Tables of results/speed-cpu/README.md, computed from the report's speed.csv.

    python results/speed-cpu/summarize.py
"""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
df = pd.read_csv(here / "report" / "speed.csv")
pruned = df[df["kind"] == "pruned"].copy()
pruned["heads_pruned"] = 72 - pruned["heads_kept"]
lat = pruned[pruned["batch"] == 1]
rows = []
for t, part in lat.groupby("seq_len"):
    r = part["measured_over_implied_reduction"]
    dense = df[(df["kind"] == "dense") & (df["batch"] == 1) & (df["seq_len"] == t)]["median_ms"].iloc[0]
    masked = df[(df["kind"] == "masked") & (df["batch"] == 1) & (df["seq_len"] == t)]["measured_speedup"].iloc[0]
    rows.append({"T": t, "head counts": len(part), "dense ms": f"{dense:.1f}", "masked speed-up": f"{masked:.3f}",
                 "measured/implied reduction: median": f"{r.median():.2f}", "min": f"{r.min():.2f}",
                 "max": f"{r.max():.2f}", "counts >= 0.8": f"{(r >= 0.8).sum()}/{len(r)}"})
print("Latency (batch 1), every head count of results/quick:\n")
print(pd.DataFrame(rows).to_markdown(index=False))
print("\nSelected counts, every shape (speed-up measured / implied by FLOPs; measured/implied reduction):\n")
sel = pruned[pruned["heads_pruned"].isin([22, 36, 52])].sort_values(["heads_pruned", "batch", "seq_len"])
out = sel.assign(**{"speed-up measured": sel["measured_speedup"].map("{:.3f}".format),
                    "implied": sel["implied_speedup"].map("{:.3f}".format),
                    "reduction ratio": sel["measured_over_implied_reduction"].map("{:.2f}".format),
                    "median ms": sel["median_ms"].map("{:.1f}".format), "IQR ms": sel["iqr_ms"].map("{:.1f}".format)})
print(out[["heads_pruned", "batch", "seq_len", "median ms", "IQR ms", "speed-up measured", "implied",
           "reduction ratio"]].to_markdown(index=False))
