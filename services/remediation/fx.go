package remediation

import (
	"atoll.dev/libs/daemon"
)

// Module is the remediation service for fx; it needs clusters.Members.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("remediation", New)
