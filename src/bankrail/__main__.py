from bankrail.cli import main

main()
