# The second call's script (v10b); see run3.sh for the layout of the package it ran in.
