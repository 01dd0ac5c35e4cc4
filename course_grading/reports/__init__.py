"""What grading produced, written out: results and the score table (``results``), the class
report (``class_report``), feedback and the CSV export (``feedback``), the LMS exports
(``grade_exports``), and the safe CSV writer they all use (``reports_csv``)."""
