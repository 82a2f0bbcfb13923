"""The paper's studies at small scale: ablations and their report (ablations,
ablation_report), Figure 1's smoothness (smoothness), and pictures (plots)."""
