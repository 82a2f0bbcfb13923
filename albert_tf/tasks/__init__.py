"""The tasks a run drives: pretraining (MLM + SOP), GLUE classification (classifier, with
metrics), SQuAD v1.1/v2.0 (squad, with squad_eval) and RACE (race)."""
