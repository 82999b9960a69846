module atoll.dev/services/upgrade

go 1.26.0
