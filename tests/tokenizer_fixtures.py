"""Texts with digit-comma pieces and the ids the original tokenizer gives them under Python 3
with data/demo/spm.model (shared by the GLUE, SQuAD and RACE feature tests).

The original's rule splits a piece like "50," into "50" and "," and, as written, drops the
word-start "▁" (id 13) that re-encoding the number adds; under Python 3 that drop never happens,
so its ids keep the 13 ("50", "▁", "0", ","; "▁5", ",").
"""

TEXT_A = "In 1990, sales were 3,500, not 2,000, units."
TEXT_B = "Prices rose 4,5,6, then fell."
# fmt: off
IDS_A = [16, 763, 14, 280, 67, 23, 35, 132, 14, 709, 13, 674, 14, 121, 119, 14, 412, 14, 13,
         1208, 28, 76, 19, 9]
IDS_B = [756, 284, 19, 308, 128, 14, 139, 14, 134, 14, 15, 28, 13, 277, 517, 9]
# The rule as written: no 13 after "50"; "5" (644), ","; "6" (832), ",".
INTENDED_IDS_A = IDS_A[:10] + IDS_A[11:]
INTENDED_IDS_B = [756, 284, 19, 308, 128, 14, 644, 14, 832, 14, 15, 28, 13, 277, 517, 9]
# fmt: on
