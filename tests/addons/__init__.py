"""popxl-addons behaviour, tested as its users write programs (one file per module of the
library); see docs/addons-support.md."""
