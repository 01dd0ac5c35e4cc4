"""The course's grades in the files of a learning management system (LMS): Moodle's CSV grade
import (``moodle``) and the gradebook CSV an instructor downloads from Canvas, filled with the
course's grades (``canvas``). ``grade_exports`` collects the grades; these modules follow the
importers' own rules, quoted in each."""
