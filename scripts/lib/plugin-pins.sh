# shellcheck shell=bash
# plugin_pins DIR prints the plugin-sha256.json of the plugins in DIR: the
# JSON object bcd's pluginPinsFile reads (bcd/config), file name -> hex
# SHA-256 of that file, one pin per regular file, sorted by name. A
# package's pins come from the very binaries it ships, so a plugin changed
# after the build is refused by bcd naming it.
plugin_pins() {
	local dir=$1 f name sum sep=""
	[ -d "$dir" ] || { echo "plugin_pins: $dir is not a directory" >&2; return 1; }
	printf '{'
	for f in "$dir"/*; do
		[ -f "$f" ] || continue
		name=${f##*/}
		# Plugin names are file names; refuse one that JSON would need to
		# escape rather than write a pins file bcd cannot match.
		if ! [[ $name =~ ^[A-Za-z0-9._+-]+$ ]]; then
			echo "plugin_pins: $f: a plugin file name must be letters, digits and ._+- only" >&2
			return 1
		fi
		sum=$(sha256sum -- "$f") || return 1
		printf '%s\n  "%s": "%s"' "$sep" "$name" "${sum%% *}"
		sep=,
	done
	printf '\n}\n'
}

# check_plugin_pins LIB checks that LIB/plugin-sha256.json pins exactly the
# files in LIB/plugins, each by its own digest, reading the pins with
# sha256sum --check rather than with plugin_pins. On success it prints the
# pins as sha256sum lines (digest, two spaces, name); otherwise it says what
# differs on stderr and returns 1.
check_plugin_pins() {
	local lib=$1 pins=$1/plugin-sha256.json sums want got
	[ -f "$pins" ] || { echo "$pins is missing" >&2; return 1; }
	sums=$(grep -oE '"[^"]+": *"[0-9a-f]{64}"' "$pins" | sed -E 's/^"([^"]+)": *"([0-9a-f]{64})"$/\2  \1/') || true
	[ -n "$sums" ] || { echo "$pins holds no pins" >&2; return 1; }
	(cd "$lib/plugins" && printf '%s\n' "$sums" | sha256sum --check --strict --quiet -) >&2 ||
		{ echo "$pins does not match the plugins in $lib/plugins" >&2; return 1; }
	want=$(find "$lib/plugins" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' ')
	got=$(printf '%s\n' "$sums" | awk '{ print $2 }' | sort | tr '\n' ' ')
	[ "$want" = "$got" ] || { echo "$pins pins [${got% }], $lib/plugins holds [${want% }]" >&2; return 1; }
	printf '%s\n' "$sums"
}
