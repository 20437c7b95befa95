module github.com/hybridlimit/hybridlimit

go 1.26
