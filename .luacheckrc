std = "max"
max_line_length = 100
files["spec/**"] = { std = "+busted" }
files["bin/rag"] = { std = "max" }
exclude_files = { "build/**" }
