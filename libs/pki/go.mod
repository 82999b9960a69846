module atoll.dev/libs/pki

go 1.26.0
