"""What a training run shows a person: a one-page report and the loader verdict (report-run)."""
