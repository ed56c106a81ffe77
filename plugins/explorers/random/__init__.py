from tunekit import hookimpl
