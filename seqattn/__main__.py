from seqattn.run import main

main()
