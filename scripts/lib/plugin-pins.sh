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
