from seqattn.run import cli

cli()
