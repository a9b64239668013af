package events_test

import "strconv"

func fmtCursor(tx uint64, id int64) string {
	return strconv.FormatUint(tx, 10) + "." + strconv.FormatInt(id, 10)
}
